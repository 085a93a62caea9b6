"""The bench tests' fixtures: the trainer tests' staged fixture corpus and real-backend Python."""

