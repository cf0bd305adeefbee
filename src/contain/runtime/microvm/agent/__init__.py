"""Source of the microVM guest agent (contain-guest-agent.c), compiled by contain.runtime.microvm.agent_build."""
