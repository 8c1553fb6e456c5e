"""Result tables: leaderboards, their cache, `show` and the suites' summaries."""
