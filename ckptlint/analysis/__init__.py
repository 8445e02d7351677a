"""From a parsed module to segments: scopes, imports, sites, targets, callees, state."""
