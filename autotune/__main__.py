from autotune.command import main

main()
