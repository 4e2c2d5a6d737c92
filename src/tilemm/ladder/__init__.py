"""The ladder: the rungs (tilemm.ladder.rungs registers them all) and what they share at run time
(launches, replay, workspaces). Importing the package registers nothing: tilemm.ladder.registry loads the
rungs on first use."""
