"""Training a small encoder or decoder from scratch into a checkpoint trajectory: the
configuration and its presets, the loop, one step (DDP options, timing) and the in-loop
measurement callback.

No module outside this room imports it (measuring never imports the trainer).
"""
