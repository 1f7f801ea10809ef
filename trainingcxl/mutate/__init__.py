"""Mutation testing (issue #17 item 3, docs/verification.md): ``model`` mutates the golden model
(``sw_model/``) with mutmut and runs the model tests against each mutant."""
