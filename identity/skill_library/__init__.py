"""The skills accord ships as folders (`accord.identity.skill_folders`)."""
