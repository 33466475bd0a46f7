"""Tools from MCP servers: their configuration (mcp.json), and the ToolBox that runs them for the panes
and for `lfm-chat -p`. Everything a server says is untrusted and cleaned here, where it enters."""
