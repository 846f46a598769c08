"""The launcher side: argv -> config -> command; devices and clusters (no torch import)."""
