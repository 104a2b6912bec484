"""The rollout side: the worker process (worker.py), the two roles it plays with one model (designer.py, agent.py
and the tool-use setting's tool_use/), their prompts, parsing and chat tokens, the inference backends
(inference/), the sandbox every environment runs in (sandbox/), and held-out evaluation (evaluation/)."""
