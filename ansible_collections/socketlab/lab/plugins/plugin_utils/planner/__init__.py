"""The isolation planner for the filters, controller side: each module here is a symlink to the
socketlab package's own file (src/socketlab/), which imports only the stdlib and its siblings
(relative imports), so the collection needs no socketlab install. The collection build copies
the files in."""
