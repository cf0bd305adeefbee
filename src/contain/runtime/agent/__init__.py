"""Source of the in-sandbox agent (contain-agent.c), compiled by contain.runtime.agent_build."""
