// The things owner of the audit and repair tests (a .ts config imports this file by its path). Test-only.
export { createThingsTable, thingsOwner, thingTuple } from '@outbox/test-stack/things-owner';
