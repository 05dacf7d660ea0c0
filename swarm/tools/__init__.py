"""Worker-side tools: the hub client and the `sw` command."""
