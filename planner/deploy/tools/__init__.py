"""Maintenance tools of planner.deploy (not imported by the planner): `engine_args` regenerates the schemas."""
