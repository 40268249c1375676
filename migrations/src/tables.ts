import { defineResourceTable } from './resource-table.js';

/*
 * The resource table of each register service: the five common columns (see ResourceTable) plus
 * what makes the resource that resource.
 */

/** `vpc.vpcs`: a virtual network. */
export const vpcTable = defineResourceTable({
  schema: 'vpc',
  table: 'vpcs',
  columns: { cidr_block: { type: 'text' } },
});

/** `compute.instances`: a virtual machine, in a vpc when `vpc_id` names one (migration 0014 added it). */
export const instanceTable = defineResourceTable({
  schema: 'compute',
  table: 'instances',
  columns: { machine_type: { type: 'text' }, image: { type: 'text' }, vpc_id: { type: 'text', nullable: true } },
});

/** `nlb.load_balancers`: a network load balancer. */
export const loadBalancerTable = defineResourceTable({
  schema: 'nlb',
  table: 'load_balancers',
  columns: { scheme: { type: 'text' }, port: { type: 'integer' } },
});

/** `storage.buckets`: an object-storage bucket. */
export const bucketTable = defineResourceTable({
  schema: 'storage',
  table: 'buckets',
  columns: { storage_class: { type: 'text' }, versioning: { type: 'boolean' } },
});

/** `registry.repositories`: a container-image repository. */
export const repositoryTable = defineResourceTable({
  schema: 'registry',
  table: 'repositories',
  columns: { format: { type: 'text' } },
});
