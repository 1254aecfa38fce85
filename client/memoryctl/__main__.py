from memoryctl.cli import entry

entry()
