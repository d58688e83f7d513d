"""The offline plan: runs the real program under Pulumi mocks and shows what `pulumi up` would create.

Never imported during `pulumi up`. Import direction: preview → workloads, infra, core.
"""
