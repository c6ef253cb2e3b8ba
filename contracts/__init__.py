"""Rules every room shares and none owns: the bottom layer (imports nothing of ours)."""
