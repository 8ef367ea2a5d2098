"""The `minibroker` command line (cli.main, the console script `cli.main:main`; also
`python -m cli`) and the optional dependencies it checks for (cli.extras). The top of the
import graph: it may import every package, and no package imports it."""
