"""The launcher: runs on the login node (validate, render, submit; stdlib + Jinja + PyYAML)."""
