"""actors.inference package."""
