"""Durable agents written with agent frameworks: each framework run call is one little agent
call, its model requests and tool calls recorded through the recording kernel
(``little.runtime.Recorder``), served from the log on a resume and from a recorded run on
``replay_from``. ``little.integrations.pydantic_ai`` (``durable``) and
``little.integrations.openai_agents`` (``LittleRunner``, ``little_tool``); each imports its
framework, installed by the extra of its name (``little-workflow[pydantic-ai]``,
``little-workflow[openai-agents]``)."""

__all__: list[str] = []
