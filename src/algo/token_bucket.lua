-- sluice token_bucket: not implemented yet (AlgorithmAvailable() is false for it).
return redis.error_reply('sluice: token_bucket is not implemented yet')
