"""Reports: everything that turns a result into text, JSON or files."""
