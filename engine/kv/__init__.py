"""Who owns which KV block: the block pool and the prefix cache over full blocks."""
