"""The GPU proof: agent_008's real path on a GPU node, stage by stage, with models made there
(``python -m trainer.proof --help``). It needs no download and imports nothing from the tests:
its data is the corpus in ``corpus/``, its judge a string match on a loopback endpoint."""
