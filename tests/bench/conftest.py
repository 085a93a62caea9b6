"""The bench tests' fixtures: the trainer tests' staged fixture corpus and real-backend Python."""


from tests.trainer.conftest import art_e_data_dir, backend_python  # fixtures shared with the trainer tests
