-- sluice gcra: not implemented yet (AlgorithmAvailable() is false for it).
return redis.error_reply('sluice: gcra is not implemented yet')
