"""planner: LLM inference fleet sizing and cost.

Library first: `planner.api` holds one function per CLI command.
"""

__version__ = "0.1.0"
