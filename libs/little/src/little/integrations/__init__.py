"""Durable agents written with agent frameworks: each framework run call is one little agent
call, its model requests and tool calls recorded through the recording kernel
(``little.runtime.Recorder``), served from the log on a resume and from a recorded run on
``replay_from``. One subpackage per framework (``little.integrations.openai_agents``); the
framework itself is an extra (``pip install little-workflow[openai-agents]``)."""

__all__: list[str] = []
