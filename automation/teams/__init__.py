"""Teams: groups of people given roles (automation.roles), made and changed in the console."""
