from tracedb.cli import main

main()
