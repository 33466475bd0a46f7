"""The `lfm-chat` command: one dispatcher (cli/main.py) over the chat, `serve`, `download` and `bench`,
and the flags they share (cli/flags.py). The packages below it never import it: app/ and server/
each take a ready value (AppOptions, ServerConfig), so neither needs the other's command line."""
