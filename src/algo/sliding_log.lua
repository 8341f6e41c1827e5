-- sluice sliding_log: not implemented yet (AlgorithmAvailable() is false for it).
return redis.error_reply('sluice: sliding_log is not implemented yet')
