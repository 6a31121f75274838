"""Cloud instances (EC2 or any AWS-compatible endpoint) and S3 results for socketlab.

- plan.py: pure planning (settings, money guard, tags, ages, costs)
- target.py: which endpoint/profile/region to talk to
- ec2.py: the boto3 calls (provision, teardown, list, reap)
- inventory.py: the generated inventory file
- actions.py: entry points for the Ansible action plugins (provision, teardown)
- ansible_action.py: the ActionModule those plugins are made of
"""
