"""The agent: email database, tools, rollout, judge, reward, scenarios."""
