"""The tools built on the library: the command line (cli), bench and its report, explain, check. The
library never imports them."""
