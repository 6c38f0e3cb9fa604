"""Durable agents written with the OpenAI Agents SDK (``pip install
little-workflow[openai-agents]``).

``await LittleRunner.run(step, agent, input, max_turns=8)`` is ``Runner.run`` as one little
agent call: every model request written ahead (``harness.model.called`` / ``responded`` /
``failed``, the SDK's native input items and its response), every function tool call recorded
(``harness.tool_call.started`` / ``succeeded`` / ``failed``), all of it served from the log on a
resume and from a recorded run on ``replay_from``. ``little_tool(function_tool(f),
side_effecting=True, requires_approval=True)`` adds what little cannot know of a tool.
"""

from little.integrations.openai_agents._runner import LittleRunner
from little.integrations.openai_agents._tools import little_tool

__all__ = ["LittleRunner", "little_tool"]
