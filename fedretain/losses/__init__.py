"""losses."""
