"""The run's store: LMDB records of environments, memory, trajectories, delayed designer rewards and the policy
version, written in batched transactions (store.py), and the environment memory's queries (memory.py)."""
