"""Staging: the data and the models a run needs (on a login node with internet, for offline
compute nodes), and a model made and warmed up for the GPU proof."""
