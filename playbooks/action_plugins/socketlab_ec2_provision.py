"""Action plugin: a controller-side shim over socketlab.cloud.actions.provision (see there)."""

from socketlab.cloud.actions import provision
from socketlab.cloud.ansible_action import action_module

ActionModule = action_module(provision)
