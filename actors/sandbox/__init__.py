"""actors.sandbox package."""
