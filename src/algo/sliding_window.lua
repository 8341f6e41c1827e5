-- sluice sliding_window: not implemented yet (AlgorithmAvailable() is false for it).
return redis.error_reply('sluice: sliding_window is not implemented yet')
