"""Selection: rank candidates by a metric that knows its direction, test the winner, publish it."""
