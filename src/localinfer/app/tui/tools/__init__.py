"""The app's tools: the MCP servers its chat connects and what each conversation lets the model use."""
