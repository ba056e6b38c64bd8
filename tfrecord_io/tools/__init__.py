"""Command-line tools of the format core."""
