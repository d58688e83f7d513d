"""What runs on the cluster: Ray Train entrypoint, MaxText argv, model presets and planner.

Never imports pulumi: the trainer is a separate program that receives its settings as arguments.
"""
