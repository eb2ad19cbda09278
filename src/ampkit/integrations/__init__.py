"""ampkit inside the trainers people already use."""
