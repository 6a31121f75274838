"""Action plugin: a controller-side shim over socketlab.cloud.actions.teardown (see that module)."""

from socketlab.cloud.actions import teardown
from socketlab.cloud.ansible_action import action_module

ActionModule = action_module(teardown)
