"""Source of the in-sandbox supervisor (contain-supervisor.c), compiled by contain.runtime.supervisor_build."""
