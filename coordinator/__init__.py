"""accord coordinator: IoA-style team conversations (the state machine, rule and LLM policies,
discovery and team-up, the runner), and the agent adapters teams work through."""
