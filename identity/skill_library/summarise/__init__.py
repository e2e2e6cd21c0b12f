"""The `summarise` skill: a model-graded summary of a business document (see skill.json)."""
