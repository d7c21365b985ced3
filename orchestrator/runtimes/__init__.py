"""Where candidates run: the runtime protocol (Ray, in-process) and the host pool that sends every driver request and rebuilds lost hosts."""
