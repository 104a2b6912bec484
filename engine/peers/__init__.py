"""The engine's peers: rollout workers and the learner as the engine sees them (dispatch, leases, the socket bus,
authentication, policy transfer, rate limits, result checks) and the child processes it starts and supervises."""
