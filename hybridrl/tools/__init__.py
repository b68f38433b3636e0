"""Tools for agentic (multi-turn) rollouts, in verl's shape.

* ``base``: verl's ``BaseTool`` / ``ToolResponse`` / ``OpenAIFunctionToolSchema`` interface.
* ``config``: verl's tool YAML (``actor_rollout_ref.rollout.multi_turn.tool_config_path``) read into ``ToolSpec``s.
* ``calls``: the tool calls a model writes (hermes ``<tool_call>{json}</tool_call>``).
* ``processes``: tool calls run in child processes, with a deadline and an answer-size limit.
* ``gsm8k``, ``lookup``: built-in tools.
"""
