"""The `sql` skill: skill.json and the code it names (run in the box, not imported)."""
