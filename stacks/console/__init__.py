"""The console's decisions (docs/console.md), pure: a cluster's row on the fleet page, and how rows are searched,
filtered, counted, sorted and paged. What a viewer may see is decided before a row reaches these (the console's
access checks); nothing here widens it."""
